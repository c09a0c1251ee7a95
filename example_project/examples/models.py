from django.db import models


class ServiceCall(models.Model):
    """One call to an in-project fake of an outside service: the side effects the demo shows."""

    service = models.CharField(max_length=100)
    key = models.CharField(max_length=200, help_text="The idempotency key the workflow passed.")
    succeeded = models.BooleanField()
    detail = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.service}({self.key})"
