"""kl's commands, one module per command group.  Each module has a
C{register(tree)} that adds its sub-commands to the
L{kilolock.kl.arguments.CommandTree}; L{kilolock.kl.main} calls them in the
order C{kl --help} lists the commands.  A command is C{cmd_NAME(ctx, args)}
returning its exit code."""
