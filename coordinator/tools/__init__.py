"""Tools a model may call: built-ins (``shell``, ``question``, ``execute``) and plugins."""
