"""What kgqr installs into the engines (OpenSearch index templates and pipelines, the
engine guard and security config, Neo4j schema and procedures, Dashboards saved objects)
and the code that installs it. Imports only kgqr_core."""
