"""The scripted user: a conversation's user played from fixed text, never by a language model.

Each turn's text is fixed (:class:`~layerlab.corpus.conversations.Turn`); a turn that depends on
the system's previous answer (the scripted answer to a clarification) has one text per category
of that reply, :data:`~layerlab.corpus.conversations.REPLY_CATEGORIES`: ``answered``,
``abstained`` or ``clarification`` (the system asked back). The user reads nothing else of the
reply, so the same categories give the same turns, byte for byte. A system that asks back at a
turn the script did not plan for gets the next scripted turn (the user moves on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from layerlab.corpus.conversations import REPLY_CATEGORIES, Conversation, ReplyCategory


def category_of(status: str | None) -> ReplyCategory:
    """The category of a reply from its status (``answered``, ``abstained``, ``clarification``);
    a reply with no status (it failed, or was not the reply contract) states nothing, so it is
    ``abstained``. Any other status is a ValueError naming it."""
    if status is None:
        return "abstained"
    if status not in REPLY_CATEGORIES:
        raise ValueError(f"reply status: expected one of {list(REPLY_CATEGORIES)}, got {status!r}")
    return cast(ReplyCategory, status)


class ScriptedUser:
    """Plays one conversation's user, turn by turn: :meth:`first`, then :meth:`reply` with the
    category of each system reply, until it returns None (the conversation is over)."""

    def __init__(self, conversation: Conversation):
        self.conversation = conversation
        self.said: list[str] = []

    @property
    def turn(self) -> int:
        """The index of the turn the user said last (-1 before the first)."""
        return len(self.said) - 1

    def first(self) -> str:
        """The opening turn's text."""
        if self.said:
            raise ValueError(f"{self.conversation.conversation_id}: the conversation has begun")
        self.said.append(self.conversation.turns[0].say(None))
        return self.said[-1]

    def reply(self, category: ReplyCategory) -> str | None:
        """The user's next turn after a system reply of ``category`` (None: no turn is left)."""
        if category not in REPLY_CATEGORIES:
            raise ValueError(
                f"reply category: expected one of {list(REPLY_CATEGORIES)}, got {category!r}"
            )
        if not self.said:
            raise ValueError(f"{self.conversation.conversation_id}: call first() before reply()")
        nxt = len(self.said)
        if nxt >= len(self.conversation.turns):
            return None
        self.said.append(self.conversation.turns[nxt].say(category))
        return self.said[-1]


def script(conversation: Conversation, categories: Sequence[ReplyCategory]) -> tuple[str, ...]:
    """Every user turn of ``conversation`` when the system's replies fall in ``categories`` (one
    per reply before the last turn; extra ones are ignored, missing ones a ValueError)."""
    need = len(conversation.turns) - 1
    if len(categories) < need:
        raise ValueError(
            f"{conversation.conversation_id}: expected {need} reply categories (one per reply "
            f"before the last turn), got {len(categories)}"
        )
    user = ScriptedUser(conversation)
    out = [user.first()]
    for c in categories[:need]:
        text = user.reply(c)
        assert text is not None
        out.append(text)
    return tuple(out)


__all__ = ["ScriptedUser", "category_of", "script"]
