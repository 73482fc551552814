"""Credential forms seen in agents' commands, tool arguments and logs, and ordinary texts that look a bit
like them: the table redaction is held to (tests/test_redact.py, tests/robustness/test_redaction_served.py,
benchmarks/bench_redact.py).

Every secret here is made up; the shapes follow the providers' documented formats (prefix, alphabet,
length) so that shape rules are exercised as real tokens would exercise them.

``SECRET_FORMS``: ``(id, text, secrets)``: none of ``secrets`` may appear in the redacted text, nor any
8-character piece of a secret longer than 12 characters (a half-masked token still leaks).
``PLAIN_FORMS``: texts with no secret that redaction must leave exactly as they are.
"""

from __future__ import annotations

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB_PAT = "ghp_R8x2LqP0vN7mT4kJ9wB3cF6hY1sD5aE0gZ2u"
GITHUB_FINE = "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Hj7"
GITLAB_PAT = "glpat-9xKq2LmNp4RsTv6WyZ8b"
STRIPE_LIVE = "sk_live_51HqLyjWDarjtT1zdp7dc4eC3"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
PGP_BODY = "lQOYBGVh3k8BCADxq7XkQ2nP9rT4vW6yZ8aB0cD2eF4gH6iJ8kL0mN2oP4qR6sT8"

SECRET_FORMS: list[tuple[str, str, tuple[str, ...]]] = [
    # -- command-line options that take a password ------------------------------------------------
    ("curl -u", "curl -u admin:hunter2 https://api.example.com/v1/items", ("hunter2",)),
    ("curl --user", "curl --user deploy:Tr0ub4dor3 https://ci.example.com/job", ("Tr0ub4dor3",)),
    ("curl -u attached", "curl -s -uadmin:hunter2 https://x.example.com", ("hunter2",)),
    ("curl --proxy-user", "curl --proxy-user bob:s3cr3tpx -x http://proxy:3128 https://x", ("s3cr3tpx",)),
    ("curl --oauth2-bearer", "curl --oauth2-bearer tok3n-deadbeef42 https://api.example.com", ("tok3n-deadbeef42",)),
    ("mysql -p attached", "mysql -u root -phunter2 app < dump.sql", ("hunter2",)),
    ("mysqldump -p attached", "mysqldump -uroot -pS3cretPw app > app.sql", ("S3cretPw",)),
    ("mysql --password", "mysql --password hunter2 -u root", ("hunter2",)),
    ("sshpass -p", "sshpass -p hunter2 ssh deploy@10.0.0.5 uptime", ("hunter2",)),
    ("sshpass -p attached", "sshpass -phunter2 scp build.tar deploy@host:/srv", ("hunter2",)),
    ("docker login -p", "docker login -u bob -p hunter2 registry.example.com", ("hunter2",)),
    ("docker login --password", "docker login --username bob --password hunter2 ghcr.io", ("hunter2",)),
    ("redis-cli -a", "redis-cli -h cache -p 6379 -a hunter2 ping", ("hunter2",)),
    ("sqlcmd -P", "sqlcmd -S db -U sa -P hunter2 -Q 'select 1'", ("hunter2",)),
    ("mongosh -p", "mongosh --username admin -p hunter2 --authenticationDatabase admin", ("hunter2",)),
    ("az login -p", "az login --service-principal -u http://app -p hunter2 --tenant t1", ("hunter2",)),
    ("ldapsearch -w", "ldapsearch -x -D cn=admin,dc=example,dc=org -w hunter2 -b dc=example,dc=org",
     ("hunter2",)),
    ("smbclient -U user%pass", "smbclient //fs/share -U bob%hunter2 -c ls", ("hunter2",)),
    ("zip -P", "zip -P hunter2 backup.zip notes.txt", ("hunter2",)),
    ("htpasswd -b", "htpasswd -bc /etc/nginx/.htpasswd admin hunter2", ("hunter2",)),
    ("gpg --passphrase", "gpg --batch --passphrase hunter2 --decrypt vault.gpg", ("hunter2",)),
    ("keytool -storepass", "keytool -list -keystore app.jks -storepass hunter2", ("hunter2",)),
    ("openssl pass:", "openssl pkcs12 -export -in c.pem -passout pass:hunter2 -out c.p12", ("hunter2",)),
    ("wget --http-password", "wget --http-user=bob --http-password=hunter2 https://x.example.com/f",
     ("hunter2",)),
    ("twine -p", "twine upload -u __token__ -p pypi-AgEIcHlwaS5vcmcCJDU3OTM1MjliLTg dist/*",
     ("pypi-AgEIcHlwaS5vcmcCJDU3OTM1MjliLTg",)),
    # -- name = value, in every common spelling ---------------------------------------------------
    ("PASS=", "PASS=hunter2 ./deploy.sh", ("hunter2",)),
    ("DB_PW=", "DB_PW=hunter2 python manage.py migrate", ("hunter2",)),
    ("passphrase=", "[signing] passphrase=hunter2", ("hunter2",)),
    ('json "pass"', '{"user": "bob", "pass": "hunter2"}', ("hunter2",)),
    ("MYSQL_PWD=", "MYSQL_PWD=hunter2 mysqldump app", ("hunter2",)),
    ("yaml password:", "db:\n  user: app\n  password: hunter2\n", ("hunter2",)),
    ("toml api_key =", 'api_key = "hunter2-api"', ("hunter2-api",)),
    ("python kwarg", "connect(host='db', user='app', password='hunter2')", ("hunter2",)),
    ("requests auth tuple", "requests.get(url, auth=('bob', 'hunter2'))", ("hunter2",)),
    ("docker run -e", "docker run -e POSTGRES_PASSWORD=hunter2 postgres:16", ("hunter2",)),
    ("kubectl --from-literal", "kubectl create secret generic db --from-literal=password=hunter2", ("hunter2",)),
    ("helm --set", "helm upgrade app ./chart --set db.password=hunter2", ("hunter2",)),
    ("terraform -var", "terraform apply -var 'db_password=hunter2'", ("hunter2",)),
    ("client secret flag", "gh auth --client-secret hunter2", ("hunter2",)),
    ("netrc", "machine api.example.com login bob password hunter2", ("hunter2",)),
    ("libpq keywords", 'psql "host=db port=5432 user=app password=hunter2 dbname=app"', ("hunter2",)),
    ("ADO.NET", "Server=db;Database=app;User Id=sa;Password=hunter2;", ("hunter2",)),
    ("JDBC", "jdbc:postgresql://db:5432/app?user=app&password=hunter2&ssl=true", ("hunter2",)),
    ("Azure storage", "DefaultEndpointsProtocol=https;AccountName=acct;"
     "AccountKey=Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA=;EndpointSuffix=core.windows.net",
     ("Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA=",)),
    ("Azure SAS sig", "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&ss=b&sig=q7ZpLr2Wn4Yb",
     ("q7ZpLr2Wn4Yb",)),
    ("refresh_token", "refresh_token=1//0gLq2xWn4Yb7Hc9Dx0Fs2kTq8Zp", ("0gLq2xWn4Yb7Hc9Dx0Fs2kTq8Zp",)),
    # -- URLs with credentials --------------------------------------------------------------------
    ("postgres URL", "psql postgresql://app:hunter2@db.internal:5432/app", ("hunter2",)),
    ("redis URL, empty user", "redis-cli -u redis://:hunter2@cache:6379/0 ping", ("hunter2",)),
    ("mongodb+srv URL", "mongosh 'mongodb+srv://admin:hunter2@cluster0.ab1cd.mongodb.net/test'", ("hunter2",)),
    ("amqp URL", "celery -b amqp://guest:hunter2@rabbitmq:5672// worker", ("hunter2",)),
    ("https userinfo", "git clone https://bob:hunter2@git.example.com/team/repo.git", ("hunter2",)),
    ("password with @", "psql postgres://app:p@ss-w0rd@db/app", ("p@ss-w0rd", "ss-w0rd")),
    ("token as URL user", "git clone https://3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a@github.com/o/r.git",
     ("3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a",)),
    ("token as URL user, with a password", "git clone https://3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a:"
     "x-oauth-basic@github.com/o/r.git", ("3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a",)),
    ("x-access-token URL", "git remote set-url origin https://x-access-token:ghs_16C7e42F292c6912E7710c838347Ae1"
     "78B4a@github.com/o/r.git", ("ghs_16C7e42F292c6912E7710c838347Ae178B4a",)),
    # -- headers ----------------------------------------------------------------------------------
    ("Authorization Bearer", 'curl -H "Authorization: Bearer tok3n-deadbeef42" https://api.example.com',
     ("tok3n-deadbeef42",)),
    ("upper-case BEARER", "AUTHORIZATION: BEARER tok3n-deadbeef42", ("tok3n-deadbeef42",)),
    ("Authorization token", "Authorization: token " + GITHUB_PAT, (GITHUB_PAT,)),
    ("Proxy-Authorization Basic", "Proxy-Authorization: Basic dXNlcjpodW50ZXIy", ("dXNlcjpodW50ZXIy",)),
    ("PRIVATE-TOKEN header", f'curl --header "PRIVATE-TOKEN: {GITLAB_PAT}" https://gitlab.example.com/api/v4',
     (GITLAB_PAT,)),
    ("X-Auth-Token header", "-H 'X-Auth-Token: 5f4dcc3b5aa765d6'", ("5f4dcc3b5aa765d6",)),
    ("Set-Cookie", "Set-Cookie: sessionid=a8Fk2Lq9Zx; HttpOnly; Secure", ("a8Fk2Lq9Zx",)),
    ("headers in JSON", '{"headers": {"authorization": "Bearer tok3n-deadbeef42"}}', ("tok3n-deadbeef42",)),
    # -- encodings and look-alike characters ------------------------------------------------------
    ("JSON-escaped", 'echo "{\\"password\\": \\"hunter2\\"}" > creds.json', ("hunter2",)),
    ("doubly JSON-escaped", '{"args": "{\\\\\\"password\\\\\\": \\\\\\"hunter2\\\\\\"}"}', ("hunter2",)),
    ("Python repr", "\"{'password': 'hunter2'}\"", ("hunter2",)),
    ("URL-encoded =", "POST /login body=user%3Dbob%26password%3Dhunter2", ("hunter2",)),
    ("doubly URL-encoded", "GET /r?next=%2Flogin%253Fpassword%253Dhunter2", ("hunter2",)),
    ("URL-encoded JSON", "q=%7B%22password%22%3A%22hunter2%22%7D", ("hunter2",)),
    ("URL-encoded Bearer", "https://proxy.example.com/fwd?h=Authorization%3A%20Bearer%20tok3n-deadbeef42",
     ("tok3n-deadbeef42",)),
    ("JSON \\u escapes", "password\\u003dhunter2", ("hunter2",)),
    ("HTML entities", "&quot;password&quot;: &quot;hunter2&quot;", ("hunter2",)),
    ("full-width =", "password＝hunter2", ("hunter2",)),
    ("full-width :", "password：hunter2", ("hunter2",)),
    ("full-width name", "ＰＡＳＳＷＯＲＤ=hunter2", ("hunter2",)),
    ("zero-width in name", "pass\u200bword=hunter2", ("hunter2",)),
    ("soft hyphen in name", "pass\u00adword=hunter2", ("hunter2",)),
    ("bidi control in name", "api\u202e_key=hunter2-api", ("hunter2-api",)),
    # -- well-known token shapes, bare ------------------------------------------------------------
    ("AWS secret with /", f"echo {AWS_SECRET} | aws configure set aws_secret_access_key", (AWS_SECRET,)),
    ("AWS secret env", f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}", (AWS_SECRET,)),
    ("AWS secret name space", f"aws configure set aws_secret_access_key {AWS_SECRET}", (AWS_SECRET,)),
    ("AWS access key id", "AKIAIOSFODNN7EXAMPLE", ("AKIAIOSFODNN7EXAMPLE",)),
    ("GitHub classic PAT", f"echo {GITHUB_PAT}", (GITHUB_PAT,)),
    ("GitHub fine-grained PAT", f"using {GITHUB_FINE} for the push", (GITHUB_FINE,)),
    ("GitLab PAT", f"export CI_PUSH={GITLAB_PAT}", (GITLAB_PAT,)),
    ("Stripe live secret", f"charging with {STRIPE_LIVE} now", (STRIPE_LIVE,)),
    ("Stripe restricted", "rk_live_51HqLyjWDarjtT1zdp7dc4eC3", ("rk_live_51HqLyjWDarjtT1zdp7dc4eC3",)),
    ("Stripe webhook", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",)),
    ("OpenAI project key", "OPENAI=sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQrSt",
     ("sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQrSt",)),
    ("Anthropic key", "x-api-key: sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
     ("sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",)),
    ("Slack bot token", "slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
     ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",)),
    ("Slack webhook", "curl -X POST https://hooks.slack.com/services/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",
     ("Fs2kTq8ZpLr1Wn4Yb7Hc9Dx0",)),
    ("Google API key", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", ("AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",)),
    ("npm token", "//registry.npmjs.org/:_authToken=npm_Ab12Cd34Ef56Gh78Ij90KlMnOpQrStUvWx12",
     ("npm_Ab12Cd34Ef56Gh78Ij90KlMnOpQrStUvWx12",)),
    ("Hugging Face token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",)),
    ("SendGrid key", "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",
     ("ngeVfQFYQlKU0ufo8x5d1A", "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr")),
    ("Vault token", "VAULT=hvs.CAESIJ0dkXz3qQ8Lm2Np4Rs6Tv8Wx0Yz2Ab4Cd6Ef8Gh0",
     ("CAESIJ0dkXz3qQ8Lm2Np4Rs6Tv8Wx0Yz2Ab4Cd6Ef8Gh0",)),
    ("JWT", f"jwt {JWT}", (JWT,)),
    ("hex private key", "PRIVATE_KEY=0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
     ("4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",)),
    # -- key blocks -------------------------------------------------------------------------------
    ("PEM RSA", f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----", (PEM_BODY,)),
    ("PEM OpenSSH", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----",
     (PEM_BODY,)),
    ("PEM in JSON", f'"private_key": "-----BEGIN PRIVATE KEY-----\\n{PEM_BODY}\\n-----END PRIVATE KEY-----\\n"',
     (PEM_BODY,)),
    ("PGP private key block", f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n=Xq7a\n"
     "-----END PGP PRIVATE KEY BLOCK-----", (PGP_BODY,)),
]

#: Texts with no secret that come up in agents' commands and detector messages; redaction keeps them whole.
PLAIN_FORMS: list[str] = [
    "cat /home/user/projects/otelloop/otelloop/detectors/engine.py",
    "ls src/components/UserProfile/AvatarUploader.tsx",
    "pytest tests/test_admin.py::test_sessions_are_listed_most_severe_first_and_filtered -q",
    "pip install python3-site-packages-2024",
    "the token limit was hit",
    "the password prompt appeared twice",
    "drift test_fail_loop on 'pytest -x': hard (EMA 0.7)",
    "git show 3f2c9a1",
    "git checkout 3f2c9a1b7d4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a",
    "docker pull python@sha256:5b2e0f1c1a8f3d0e9c4b7a6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f",
    "GET /v1/sessions/550e8400-e29b-41d4-a716-446655440000",
    "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "ssh -p 2222 deploy@build.example.com",
    "redis-cli -p 6380 ping",
    "mysql -u root -p app",
    "curl -u admin https://api.example.com/v1/items",
    "docker run -u 1000:1000 -v /srv/data:/data alpine:3.19 ls",
    "llm call with max_tokens=1024 and temperature=0.2",
    '{"input_tokens": 523, "output_tokens": 88}',
    "kubectl get pods -n kube-system -o wide",
    "kubectl logs deploy/web -n prod --since=1h",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01'",
    "5 passed, 2 failed in 3.21s",
    "docker build -t myapp:latest -f docker/Dockerfile.prod .",
    "https://github.com/open-telemetry/opentelemetry-python/blob/main/README.md",
    "npm install --save-dev @types/node@20.11.5",
    "author=Jane Doe",
    "printf '%s\\n' done; echo 100%",
    r"type C:\Users\bob\AppData\Local\Temp\build.log",
    'headers = {"Content-Type": "application/json"}',
    "ERROR: relation \"users\" does not exist",
    "export PATH=/usr/local/bin:$PATH",
    "café naïve Ünïcode résumé",
    "entropy 0.2: 'search_web' (execute_tool, success) is 5 of the last 5 steps",
]


def leaks(secrets: tuple[str, ...], text: str) -> list[str]:
    """The secrets (or 8-character pieces of the longer ones) still readable in ``text``."""
    found = []
    for secret in secrets:
        if secret in text:
            found.append(secret)
        elif len(secret) > 12:
            pieces = [secret[i:i + 8] for i in range(len(secret) - 7)]
            found.extend(p for p in pieces if p.isalnum() and p in text)
    return found
