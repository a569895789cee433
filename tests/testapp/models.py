from django.db import models


class SideEffect(models.Model):
    """One row per completed handler run, to count executions across processes."""

    job_id = models.BigIntegerField(db_index=True)
    attempt = models.PositiveIntegerField()
    label = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)


class Order(models.Model):
    number = models.CharField(max_length=20)
