"""The Python client that speaks the topic contract: publish, request, wait for replies."""
