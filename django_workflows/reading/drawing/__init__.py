"""Server-rendered SVG for the admin: the diagram of a workflow and the timeline of an instance.

Every string that reaches the SVG is escaped by ``svg.Canvas``, so a step name, an error message or an
event sender written by anyone is drawn as text, never markup.
"""
