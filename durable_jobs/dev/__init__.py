"""Development aids: :mod:`.inline`, the worker inside ``manage.py runserver``.

The modules of this package are internal.
"""
