"""Graph-scoped reservations: several applies on one state, side by side.

A reservation pins a snapshot of a state's current version and claims a
write set and a read set of resource instances.  Terraform runs through a
view of it, and each state the view is sent is merged into the state's
current version, by resource instance.  Pure: no Twisted, no I/O.

  - L{kilolock.reservations.model}: claims and address sets (what a
    reservation's body names), the conflicts between reservations;
  - L{kilolock.reservations.index}: a state's per-resource digests (what a
    reservation keeps of its base, and the store of a current version);
  - L{kilolock.reservations.derived}: outputs, check results and the
    Terraform version, merged;
  - L{kilolock.reservations.merge}: the merge of a state sent to a view.
"""
