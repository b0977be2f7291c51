"""``privbench audit-app PATH``: audit a Flower app as its users wrote it.

The app runs unmodified in Flower's simulation; privbench wraps its ServerApp's grid (every message both ways,
``recording``), its ClientApp (the records each client trained and evaluated on, and the DP libraries it called,
``client_side``) and its strategy's ``start`` (the DP wrappers it chose, ``privacy``). The recorded uploads are then
attacked (``attacks``), its privacy mods measured (``privacy``), and a report and a CI gate written (``report``,
``gate``). ``docs/audit-app.md`` says what is recorded and what the attacker is assumed to know.
"""
