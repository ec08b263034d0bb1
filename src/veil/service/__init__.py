"""veil's HTTP service (``pip install 'veil[service]'``): FastAPI over the catalog, sessions
and the ledger. Start it with ``veil serve --config veil.toml``; build the app in Python with
:func:`veil.service.app.create_app`. This package imports FastAPI only when its modules are
imported: ``veil admin`` (:mod:`veil.service.principals`) needs none of it."""
