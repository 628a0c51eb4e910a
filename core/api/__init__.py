"""The REST machinery every app's API shares: input limits, the error shape and handler,
the base view, and the OpenAPI post-processing."""
