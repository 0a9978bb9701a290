"""The HTTP API of contract section 4.

``app.build_app`` makes the Starlette app over a ``Coordinator``; ``serve.serve`` runs it with
hypercorn's trio worker and shuts down gracefully. ``bodies`` and ``schema`` hold the request and
response classes and the JSON schemas generated from them; ``openapi`` turns the route table into the
OpenAPI document; ``sse`` streams events; ``auth`` and ``errors`` are the two middlewares.
"""
