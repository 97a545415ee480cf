"""One turn: a channel's portal queues an owner's message, routing and mentions say who answers,
the prompt is built (context, attachments), the agent answers into a streamed message, and the
journal records how far it got."""
