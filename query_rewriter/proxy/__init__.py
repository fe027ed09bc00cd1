"""The HTTP face: routes OpenSearch's REST API, reads and bounds request bodies, turns
_search, _msearch and templates into search plans, shapes answers, and passes the rest
through untouched."""
