"""The front's OpenAPI 3.1 description and its documentation pages (reference: API documentation, Schema generation,
Field descriptions).

drf-spectacular serves the document at ``/openapi.json``, Swagger UI at ``/docs`` and ReDoc at ``/redoc``; their assets
come from drf-spectacular-sidecar, so the pages work with no internet. The package is cut along its seams, each module
importing only those above it in this list:

- :mod:`~front_operations.openapi.error_table`: each route's error codes by status, their statuses and retry headers
  read from the failure catalogue of ``chat/errors.py``;
- :mod:`~front_operations.openapi.schemas`: the component schemas generated from the pydantic models, the stream event
  schemas and the request examples;
- :mod:`~front_operations.openapi.document`: the paths, info and security scheme, added by the postprocessing hook
  :func:`~front_operations.openapi.document.add_front_paths`;
- :mod:`~front_operations.openapi.assets`: the pages' static files
  (:class:`~front_operations.openapi.assets.StaticAssetsMiddleware`), the ReDoc bundle without its remote logo, the
  favicon;
- :mod:`~front_operations.openapi.pages`: the views of ``/openapi.json``, ``/docs``, ``/redoc`` and the two guides.

The document describes the handlers and does not change how they behave.
"""
