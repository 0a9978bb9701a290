"""The HTTP API: sessions, turns, permission requests, forms and the event stream over HTTP.

``app.build_app`` makes the Starlette app over a ``Coordinator``; ``serve.serve`` runs it with
hypercorn's trio worker and shuts down gracefully. ``bodies`` and ``schema`` hold the request and
response classes and the JSON schemas generated from them; ``openapi`` turns the route table into the
OpenAPI document; ``sse`` streams events; ``edge`` (Host, Origin, Content-Type, CORS), ``auth`` and
``errors`` are the middlewares; ``event_schemas`` types every event for the document
(``design/http.md``).
"""
