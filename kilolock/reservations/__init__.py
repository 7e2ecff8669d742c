"""Graph-scoped reservations: several applies on one state, side by side.

A reservation pins a snapshot of a state's current version and claims a
write set and a read set of resource instances.  Terraform runs through a
view of it, and each state the view is sent is merged into the state's
current version, by resource instance.  Pure: no Twisted, no I/O.  From the
bottom up:

  - L{kilolock.reservations.model}: claims and address sets (what a
    reservation's body names), the conflicts between reservations;
  - L{kilolock.reservations.canonical}: an instance object's canonical
    form and digests;
  - L{kilolock.reservations.text}: a state's text split into members and
    resources' texts;
  - L{kilolock.reservations.resources}: resources read from their texts;
  - L{kilolock.reservations.index}: a state's per-resource digests (what a
    reservation keeps of its base, and a store of a current version), and
    the checks of claims against a state;
  - L{kilolock.reservations.render}: text laid out as Terraform writes it;
  - L{kilolock.reservations.derived}: outputs, check results and the
    Terraform version, merged;
  - L{kilolock.reservations.outcome}: what a merge answers;
  - L{kilolock.reservations.pairing} and L{kilolock.reservations.splice}:
    the view's resources paired with the current version's, and the merged
    text;
  - L{kilolock.reservations.merge}: the merge of a state sent to a view.
"""
