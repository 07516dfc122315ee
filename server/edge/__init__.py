"""The gRPC edge: one thin servicer per service, and the mapping of domain errors to status.

Servicers parse nothing and decide nothing: they hand the request to the domain and let
`status.unary` / `status.streaming` translate a `BrainError` into a gRPC status.
"""
