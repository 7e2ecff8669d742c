"""The PostgreSQL schema: numbered migrations, the full current schema, and the upgrader."""
