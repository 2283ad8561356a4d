"""The front's operations routes, as one include for the front's own project and for a host project
(:mod:`front_operations.urls`): liveness, readiness (:mod:`front_operations.readiness`), metrics, the API
description of the apps and its pages (:mod:`front_operations.openapi`), and the guides, whose Markdown sources are
this package's data (``guides/*.md``).
"""
