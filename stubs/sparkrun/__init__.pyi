# The few names of sparkrun 0.4.2 that sparkbake's sparkrun plugin uses, typed for mypy here,
# where sparkrun is not installed (it needs Python 3.12; the plugin runs in sparkrun's own
# environment): src/sparkbake/sparkrun_plugin/sparkbake_builder.py.
