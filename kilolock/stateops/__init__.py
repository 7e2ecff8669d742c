"""Server-side state operations and upload sessions of the native API.

  - L{model}: the records (an operation, an upload session, a chunk, a
    write of several states) and who owns them (L{model.Owner});
  - L{interfaces}: what the stores keep of them (L{interfaces.IStateOperationsStore});
  - L{requests}: an operation request's body, parsed;
  - L{plans}: what each kind of operation does to the states (pure);
  - L{runner}: running operations (locks, progress, cancellation, leases);
  - L{chunks}: the rules of an upload session's chunks (pure).

Operations and upload sessions are handles owned by the tenant and the
principal that created them: everyone else is answered as if they did not
exist (L{model.Owner}).
"""
