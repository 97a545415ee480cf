-- Runs once, when the PostgreSQL volume is created. The server's own database (`synapse`,
-- owner `synapse`) is made by the image with C collation, as Synapse requires.
CREATE ROLE sidekicks LOGIN PASSWORD 'sidekicks';
CREATE DATABASE sidekicks OWNER sidekicks;
