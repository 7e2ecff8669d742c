"""The rules Kilolock decides once: locks and serials, scope, listings, resource
search, hosted names, audit windows.  Pure: no Twisted, no I/O."""
