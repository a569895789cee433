"""Django-Q2's side of the comparison: a Django project, its tasks and its driver."""
