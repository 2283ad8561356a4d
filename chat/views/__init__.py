"""The HTTP adapters, one module per API: read, serve, and map the outcome to HTTP with that API's renderers."""
