"""C{kl}: inspect and repair Kilolock states from a terminal or a script.

Synchronous on purpose (the standard library's C{http.client}, threads for
lane discovery): a command is a few requests and then the process ends.

The package, bottom up: L{exits} (exit codes, L{exits.KlError}),
L{config} (flags, C{KL_*} variables, kl.toml), L{output} (tables, C{--json},
the progress bar), L{client} (one HTTP exchange, an answer's error),
L{discovery} (which lane serves which command), L{context} (what a command
works with), L{arguments} (the parser's pieces), one module per command group
under L{commands}, and L{main} (the parser and the C{kl} entry point).  See
docs/kl.md for every command, option and exit code.

Nothing here imports Twisted or the web tree: C{kl} starts fast.
"""
