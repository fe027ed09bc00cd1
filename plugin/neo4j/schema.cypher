// kgqr's Neo4j schema. Every node carries the :Node label and a (kb, id) pair that is
// unique, so re-ingest MERGEs instead of duplicating; type labels sit beside :Node.
CREATE CONSTRAINT kgqr_node_key IF NOT EXISTS FOR (n:Node) REQUIRE (n.kb, n.id) IS UNIQUE;
CREATE INDEX kgqr_node_type IF NOT EXISTS FOR (n:Node) ON (n.kb, n.type);
CREATE INDEX kgqr_node_name IF NOT EXISTS FOR (n:Node) ON (n.kb, n.name);
