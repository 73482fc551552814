"""OTLP receivers (gRPC and HTTP) and the admission logic they share."""
