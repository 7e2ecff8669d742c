"""The PostgreSQL store, one layer per module, bottom to top:

  - L{dsn}: the connection string and session settings;
  - L{prepared}, L{connection}, L{pool}: sessions on the reactor (reconnecting,
    BEGIN/COMMIT with the first/last statement, prepared statements) and
    their pool -- no domain imports;
  - L{binary_read}, L{blocking}: a transaction on a blocking connection in a
    thread (COPY, binary results), for large states;
  - L{runner}: L{runner.TransactionRunner.run_interaction} runs a
    transaction on either path, with deadlines, retries and the 503;
  - L{codecs} (values to SQL), L{rows} (rows to values), L{statements} (the
    state lane's SQL, in order of use);
  - L{events}, L{states}, L{reads}, L{large}: the audit chain and the state
    lane's transactions; L{tenants}: hosted mode's;
  - L{store}: L{store.PostgresStateStore}, those parts put together, and
    L{store.postgres_store_from_settings}.

This package imports none of its modules: import the store from
L{kilolock.store.postgres.store}.  (Every module of the package imports this
one first, so names re-exported here would close an import cycle.)
"""
