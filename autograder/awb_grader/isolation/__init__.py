"""Isolation of student code: the grading kernel's launcher and its limits (``sandbox.py``), what
each exercise provides inside it (``provided.py``), and the isolation tiers (``tiers.py``):

* ``bwrap``: bubblewrap's namespaces, where the machine lets it make them (``sandbox.py``);
* ``landlock``: where it does not (an unprivileged container: Gradescope, PrairieLearn, a
  restricted Kubernetes pod), the kernel's Landlock (``landlock.py``), a seccomp filter
  (``syscalls.py``), resource limits and, when the grader is root, a uid of its own; applied by
  ``confine.py`` just before the student's program starts;
* ``limits``: resource limits only, never chosen unless the grader says the grades may be
  unprotected.
"""
