"""What a task is: the validated task spec (``schema``), its named variants (``variants``), the
catalogue of committed tasks (``catalog``), the generated field reference (``reference``) and the
command-line arguments that select tasks and defenses (``arguments``).
"""
