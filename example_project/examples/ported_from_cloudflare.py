"""A workflow of Cloudflare's Python Workflows documentation (workflows/python/python-workers-api, "Error
Handling"), ported by changing its import line and nothing else: ``from workers import
WorkflowEntrypoint`` became the line below. A step that raises ``TypeError`` is retried with Cloudflare's
defaults (5 retries, 10 seconds, exponential), then the error reaches run() as ``TypeError``."""

from django_workflows.cloudflare import WorkflowEntrypoint


class ErrorHandlingWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        async def try_step(fn):
            try:
                return await fn()
            except Exception as e:
                print(f"Successfully caught {type(e).__name__}: {e}")

        @step.do("my_failing")
        async def my_failing():
            print("Executing my_failing")
            raise TypeError("Intentional error in my_failing")

        await try_step(my_failing)
