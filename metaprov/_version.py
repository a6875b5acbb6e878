"""The package version and where its documentation is published, in a module of their own so
every stage can read them without the public API. The version is read from here by the build
(pyproject.toml: ``version = {attr = ...}``), ``metaprov --version`` and ``metaprov.__version__``."""

__version__ = "0.1.0"

#: The documentation site (``mkdocs.yml``'s ``site_url``; pyproject.toml's Documentation URL).
DOCS_URL = "https://metaprov.github.io/metaprov/"

#: The source repository (``mkdocs.yml``'s ``repo_url``; pyproject.toml's Source URL). The
#: documentation links a source file as ``SOURCE_URL + "/blob/main/" + path``.
SOURCE_URL = "https://github.com/metaprov/metaprov"


def docs_url(page: str = "") -> str:
    """The URL of a documentation page: ``docs_url("scaling")`` -> ``.../scaling/``."""
    return DOCS_URL + (page.strip("/") + "/" if page else "")
