"""The foundations every layer uses: the input errors and their checks (``errors``), the name ->
implementation registries and the import of a package's modules (``registry``), the calling of
registered factories with a user's parameters (``params``), the tensor wire format between
processes (``wire``) and the YAML reading and writing (``yaml_io``).
"""
