"""A scripted OpenAI-compatible ``/v1/chat/completions`` endpoint on 127.0.0.1.

Some instrumentations trace only a framework's own model classes (OpenInference's smolagents
instrumentor: ``OpenAIServerModel``; OpenLLMetry: the ``openai`` client), so a scripted model of one's
own would leave no LLM spans. Those frameworks keep their real model class and HTTP client and talk to
this endpoint instead, which answers from a script with the usage the script says.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: reply(n, path, body) -> (HTTP status, JSON payload); n counts the requests from 1.
Reply = Callable[[int, str, dict[str, Any]], tuple[int, dict[str, Any]]]


def serve_json(reply: Reply) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 (port: ``server_port``) answering each POST with ``reply``'s payload.

    It serves from a daemon thread until ``shutdown()``.
    """
    counter = {"n": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                counter["n"] += 1
                n = counter["n"]
            status, payload = reply(n, self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One entry of an assistant message's ``tool_calls``."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def chat_completion(n: int, model: str, message: dict[str, Any], finish_reason: str, prompt_tokens: int,
                    completion_tokens: int) -> dict[str, Any]:
    """A ``chat.completion`` object with one choice; its id and creation time derive from ``n`` only, so a
    re-recording gives the same response."""
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1_700_000_000 + n, "model": model,
            "choices": [{"index": 0, "finish_reason": finish_reason, "message": message}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
