"""The built-in branching-conversation suite: one long shared history, a different last question.

    servediff run --suite branching ...
    servediff experiment examples/tuned-factors.toml      # exercises the prefix-cache factor

Prefix caching (reusing the KV state of a prompt's shared beginning) only matters when prompts
share a beginning, and the 20 built-in prompts share nothing beyond the chat template. Here every
item replays the same system message and the same four earlier turns of a conversation, then
asks its own question: after the first item, almost all of each prompt can come from the cache,
so a configuration with prefix reuse computes most of its prompt differently from one without.
"""

from __future__ import annotations

from servediff.suites.base import Suite, content_sha256
from servediff.types import Sample

VERSION = "1"

SYSTEM = (
    "You are a patient programming tutor. You answer in plain English, give short code examples "
    "in Python when they help, and point out one common mistake when there is one."
)

# The shared history: two exchanges about the same small program.
HISTORY: tuple[tuple[str, str], ...] = (
    (
        "I am writing a small Python program that reads a CSV file of book loans from a library. "
        "Each row has a member id, a book title, the date it was borrowed and the date it was "
        "returned (empty if the book is still out). How should I start?",
        "Start with the csv module from the standard library. Open the file with "
        "`open(path, newline='')`, wrap it in `csv.DictReader`, and loop over the rows: each row "
        "is a dictionary keyed by the header names. Convert the two dates with "
        "`datetime.date.fromisoformat`, and treat an empty return date as `None`. A common mistake "
        "is forgetting `newline=''`, which can produce blank rows on some systems.",
    ),
    (
        "Thanks. I now have a list of dictionaries, one per loan. Some members borrowed many books "
        "and some books were borrowed many times. What is a good way to organise this data?",
        "Group it. A `collections.defaultdict(list)` keyed by member id gives every member's "
        "loans, and a second one keyed by title gives every book's loans. Keep the original list "
        "too, so you can always go back to the rows as read. A small dataclass `Loan(member, "
        "title, borrowed, returned)` makes the code easier to read than raw dictionaries, and "
        "mypy can then check it.",
    ),
)

QUESTIONS: dict[str, str] = {
    "branch-overdue": "How do I find every loan that has been out for more than 21 days today?",
    "branch-top-books": "How do I list the five most borrowed books?",
    "branch-average": "How do I compute the average loan length in days for returned books?",
    "branch-member": "How do I print one member's loans sorted by the date borrowed?",
    "branch-bad-dates": "Some rows have a return date before the borrow date. How do I catch them?",
    "branch-test": "How would I write a pytest test for the grouping code?",
    "branch-json": "How do I save the grouped data to a JSON file?",
    "branch-speed": "The file now has two million rows. What should I change so it stays fast?",
    "branch-month": "How do I count loans per month of the year?",
    "branch-never": "How do I find books in the catalogue that were never borrowed?",
    "branch-poem": "Write a short poem about the library's busiest member.",
    "branch-summary": "Summarise what we have built so far in three sentences.",
}


def _messages(question: str) -> tuple[dict[str, str], ...]:
    turns: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    for user, assistant in HISTORY:
        turns += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    turns.append({"role": "user", "content": question})
    return tuple(turns)


def builtin() -> Suite:
    samples = tuple(Sample(id=item_id, messages=_messages(q)) for item_id, q in QUESTIONS.items())
    return Suite(
        name="branching",
        version=VERSION,
        samples=samples,
        data_sha256=content_sha256(samples),
        source="built-in",
        max_tokens=128,
    )
