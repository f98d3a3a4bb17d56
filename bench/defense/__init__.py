"""Defenses: the one module a defense plugin imports (``base``), the plugin base class, registry and
loading of ``defenses/*.py`` (``plugin``), the hooks every protocol calls (``hooks``), row-wise
defenses and their tensor operations (``rowwise``), the papers the defenses implement
(``sources``), the DP defenses' base classes (``dp``) and the libraries they use: differential
privacy (``privacy/``) and secure aggregation (``secagg/``). Nothing is imported here: importing a
submodule from this file would create import cycles.
"""
