"""What each documentation page's examples must have done, one module per page (see
``tests/docs/docs_runner.py``): ``async def check(namespace)`` runs after the page's blocks,
in the same process, with the page's namespace, in the page's scratch directory."""
