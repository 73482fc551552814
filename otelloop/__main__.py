from otelloop.cli import main

main()
