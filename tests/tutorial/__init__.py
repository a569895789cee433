"""Following docs/tutorial/ for real: read its pages, then run every block on a new site.

``pages`` reads the reStructuredText, ``files`` writes the blocks that are files,
``console`` splits console blocks into commands and checks their output, ``environment``
prepares the virtualenv the tutorial creates, ``server`` runs the development server and
logs in to the admin, and ``site`` drives them in the tutorial's order.
"""
