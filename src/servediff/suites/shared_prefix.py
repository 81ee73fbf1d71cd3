"""The built-in shared-prefix suite: one long Python module, then a different question about it.

    servediff run --suite shared-prefix ...
    servediff experiment examples/llama-server-gpu.toml     # swept under load on a GPU server

Under concurrent load a server with prompt caching and several slots can serve the long common
beginning of these prompts from its KV cache, in other batches than a fresh prompt would be
evaluated in, while other slots decode beside it. The ``branching`` suite shares about 300 tokens
of conversation; here every item shares about 1,300 tokens of code (the same system message and
the same module), and only its last sentence differs, so what a cached, batched prefix does to
the answers dominates. There are 32 questions, enough to fill 32 slots at once.
"""

from __future__ import annotations

from servediff.suites.base import Suite, content_sha256
from servediff.types import Sample

VERSION = "1"

SYSTEM = "You are a careful senior Python reviewer. Answer about the module the user shows, briefly."

# The shared module: plain, self-contained code a reviewer can be asked many things about.
MODULE = '''\
"""A tiny in-memory library loan service: members borrow books, return them, pay late fees."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

LOAN_DAYS = 21
FEE_PER_DAY = 0.25
MAX_FEE = 10.0
MAX_LOANS = 5


@dataclass
class Book:
    isbn: str
    title: str
    copies: int = 1


@dataclass
class Member:
    member_id: int
    name: str
    fees: float = 0.0
    blocked: bool = False


@dataclass
class Loan:
    member_id: int
    isbn: str
    borrowed: dt.date
    returned: dt.date | None = None

    def due(self) -> dt.date:
        return self.borrowed + dt.timedelta(days=LOAN_DAYS)

    def days_late(self, today: dt.date) -> int:
        end = self.returned or today
        return max(0, (end - self.due()).days)


@dataclass
class Library:
    books: dict[str, Book] = field(default_factory=dict)
    members: dict[int, Member] = field(default_factory=dict)
    loans: list[Loan] = field(default_factory=list)

    def add_book(self, isbn: str, title: str, copies: int = 1) -> None:
        if isbn in self.books:
            self.books[isbn].copies += copies
        else:
            self.books[isbn] = Book(isbn, title, copies)

    def join(self, member_id: int, name: str) -> Member:
        member = Member(member_id, name)
        self.members[member_id] = member
        return member

    def open_loans(self, member_id: int | None = None) -> list[Loan]:
        return [
            loan for loan in self.loans
            if loan.returned is None and (member_id is None or loan.member_id == member_id)
        ]

    def available(self, isbn: str) -> int:
        out = sum(1 for loan in self.open_loans() if loan.isbn == isbn)
        return self.books[isbn].copies - out

    def borrow(self, member_id: int, isbn: str, today: dt.date) -> Loan:
        member = self.members[member_id]
        if member.blocked:
            raise PermissionError(f"member {member_id} is blocked")
        if len(self.open_loans(member_id)) >= MAX_LOANS:
            raise PermissionError(f"member {member_id} has {MAX_LOANS} books already")
        if self.available(isbn) <= 0:
            raise LookupError(f"no copy of {isbn} is available")
        loan = Loan(member_id, isbn, today)
        self.loans.append(loan)
        return loan

    def give_back(self, member_id: int, isbn: str, today: dt.date) -> float:
        for loan in self.open_loans(member_id):
            if loan.isbn == isbn:
                loan.returned = today
                fee = min(MAX_FEE, loan.days_late(today) * FEE_PER_DAY)
                self.members[member_id].fees += fee
                if self.members[member_id].fees > MAX_FEE:
                    self.members[member_id].blocked = True
                return fee
        raise LookupError(f"member {member_id} has no open loan of {isbn}")

    def pay(self, member_id: int, amount: float) -> None:
        member = self.members[member_id]
        member.fees = max(0.0, member.fees - amount)
        if member.fees <= MAX_FEE:
            member.blocked = False

    def overdue(self, today: dt.date) -> list[Loan]:
        return [loan for loan in self.open_loans() if loan.days_late(today) > 0]

    def most_borrowed(self, n: int = 5) -> list[tuple[str, int]]:
        counts: dict[str, int] = defaultdict(int)
        for loan in self.loans:
            counts[loan.isbn] += 1
        ranked = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)
        return [(self.books[isbn].title, count) for isbn, count in ranked[:n]]

    def report(self, today: dt.date) -> str:
        lines = [f"{len(self.books)} titles, {len(self.members)} members"]
        lines.append(f"{len(self.open_loans())} books out, {len(self.overdue(today))} overdue")
        owing = [m for m in self.members.values() if m.fees > 0]
        lines.append(f"{len(owing)} members owe {sum(m.fees for m in owing):.2f}")
        return "\\n".join(lines)
'''

QUESTIONS: dict[str, str] = {
    "prefix-summary": "Summarise what this module does in three sentences.",
    "prefix-due": "How is a loan's due date computed? Quote the line.",
    "prefix-fee": "How much does a member pay for a book returned 10 days late? Show the arithmetic.",
    "prefix-maxfee": "Can one late book cost more than MAX_FEE? Explain with the code.",
    "prefix-blocked": "When does a member become blocked, and when are they unblocked?",
    "prefix-bug-block": "There is an inconsistency between give_back and pay about blocking. What is it?",
    "prefix-available": "What is the time complexity of available(), and how would you make it O(1)?",
    "prefix-test-borrow": "Write a pytest test that checks borrow() refuses a sixth book.",
    "prefix-test-fee": "Write a pytest test for the late fee of give_back().",
    "prefix-test-overdue": "Write a pytest test for overdue().",
    "prefix-join-twice": "What happens if join() is called twice with the same member_id? Is it a bug?",
    "prefix-unknown-isbn": "What happens when borrow() gets an ISBN that is not in the library?",
    "prefix-float-money": "Is float a good type for fees? Suggest a better one and show the change.",
    "prefix-most-borrowed": "Explain most_borrowed() line by line.",
    "prefix-ties": "How does most_borrowed() order books that were borrowed equally often?",
    "prefix-report": "What does report() print for an empty library? Give the exact output.",
    "prefix-remove-book": "Add a method remove_book(isbn) that refuses while copies are on loan.",
    "prefix-renew": "Add a method renew(member_id, isbn, today) that extends a loan once.",
    "prefix-history": "Add a method history(member_id) returning the member's loans, newest first.",
    "prefix-json": "How would you save a Library to JSON and load it back? Show the code.",
    "prefix-threads": "Is this class safe to use from several threads? What could go wrong?",
    "prefix-typing": "Which type annotations would mypy --strict complain about, if any?",
    "prefix-dates": "Why does days_late take today as a parameter instead of calling date.today()?",
    "prefix-give-back-name": "Suggest a clearer name for give_back and explain why.",
    "prefix-exceptions": "List every exception this module can raise and when.",
    "prefix-constants": "Should LOAN_DAYS and FEE_PER_DAY be module constants? Discuss briefly.",
    "prefix-open-loans": "Rewrite open_loans() without the list comprehension, as a plain loop.",
    "prefix-docstrings": "Write docstrings for borrow() and give_back().",
    "prefix-sql": "Sketch SQL tables that could store the same data as this module.",
    "prefix-copies": "What happens if add_book() is called with copies=0 or a negative number?",
    "prefix-fee-cap": "A member returns three books each 60 days late. What are their fees? Show it.",
    "prefix-haiku": "Write a haiku about this library module.",
}


def _messages(question: str) -> tuple[dict[str, str], ...]:
    shared = f"Here is a Python module:\n\n```python\n{MODULE}```\n\n"
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": shared + question})


def builtin() -> Suite:
    samples = tuple(Sample(id=item_id, messages=_messages(q)) for item_id, q in QUESTIONS.items())
    return Suite(
        name="shared-prefix",
        version=VERSION,
        samples=samples,
        data_sha256=content_sha256(samples),
        source="built-in",
        max_tokens=128,
    )
