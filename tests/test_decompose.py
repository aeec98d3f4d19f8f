"""decompose(): the labelled corpora's scores, and the rules that keep one question whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitter import InvalidInputError, decompose

DATA = Path(__file__).parent / "data"
CORPORA = sorted(DATA.glob("decompose_*.jsonl"))


def load(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def norm(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path", CORPORA, ids=[p.stem for p in CORPORA])
def test_labelled_corpus_meets_the_split_targets(path: Path) -> None:
    """At least 95% of prompts split exactly as labelled, and no single-question prompt split."""
    rows = load(path)
    exact, split_singles, misses = 0, [], []
    for row in rows:
        parts = [norm(p.text) for p in decompose(str(row["prompt"])).parts]
        want = [norm(str(p)) for p in row["parts"]]  # type: ignore[attr-defined]
        exact += parts == want
        if parts != want:
            misses.append(row["id"])
        if row["kind"] == "single" and len(parts) > 1:
            split_singles.append(row["id"])
    assert len(rows) >= 60
    assert exact >= 0.95 * len(rows), f"{exact}/{len(rows)} exact; missed {misses}"
    assert split_singles == []


def test_numbered_questions_split_with_preamble_and_postscript() -> None:
    d = decompose("Answer separately:\n1. What is 2+2?\n2) Why is the sky blue?\n\nBe brief.")
    assert [p.text for p in d.parts] == ["What is 2+2?", "Why is the sky blue?"]
    assert [p.label for p in d.parts] == ["1.", "2)"]
    assert (d.preamble, d.postscript) == ("Answer separately:", "Be brief.")
    assert d.question_text(1) == "Answer separately:\n\nWhy is the sky blue?\n\nBe brief."


@pytest.mark.parametrize(
    "prompt",
    [
        "Compare Python, Java and Go for web services, and say which compiles fastest.",
        "```\n1. x = input('name?')\n2. print(x)\n```\nWhy does this ask twice? What's wrong?",
        'She asked "Where are you? When will you be back?" — how should I reply?',
        "Write a haiku that:\n1. mentions rain\n2. has a kigo\n3. ends with a question",
        "Which is a prime?\nA. 4\nB. 6\nC. 7\nD. 9",
        "Summarise this email:\nHi! Can we meet Friday? Did you see the budget?",
    ],
)
def test_one_question_is_never_split(prompt: str) -> None:
    """Item lists inside one question, code, quotes, requirements, options, material."""
    d = decompose(prompt)
    assert d.single
    assert d.parts[0].text == prompt.strip()


def test_chinese_and_turkish_paragraphs_split_on_full_width_marks() -> None:
    zh = decompose("我下个月去上海。天气怎么样？地铁几点停运？")
    assert [p.text for p in zh.parts] == ["天气怎么样？", "地铁几点停运？"]
    assert zh.preamble == "我下个月去上海。"
    tr = decompose("Ankara'ya taşınıyorum. Kiralar pahalı mı? Toplu taşıma iyi mi?")
    assert len(tr.parts) == 2


def test_dependencies_are_detected_and_err_towards_waiting() -> None:
    chain = decompose(
        "1. Which country is the largest in Africa?\n"
        "2. What is the capital of that country?\n"
        "3. Using your answer to question 2, how many people live there?"
    )
    assert [p.depends_on for p in chain.parts] == [(), (0,), (1,)]
    independent = decompose("1. What is HTTP?\n2. What is DNS?\n3. What is TLS?")
    assert all(p.depends_on == () for p in independent.parts)


def test_blank_and_non_text_prompts_are_clear_errors() -> None:
    """Both are the package's one bad-input error (a ValueError), naming what is wrong."""
    with pytest.raises(InvalidInputError, match="blank"):
        decompose("  \n ")
    with pytest.raises(InvalidInputError, match="prompt must be a str, not bytes"):
        decompose(b"bytes")  # type: ignore[arg-type]


def test_a_constraint_stays_with_the_request_before_it() -> None:
    """Issue 17 item 8: "Make it ...", "Halte sie ...", "Explain why." are not requests."""
    for prompt in [
        "Explain how a heat pump works. Keep it under 150 words.",
        "Is 1 a prime number? Explain why.",
        "Schreib eine Rede für die Hochzeit. Halte sie unter drei Minuten.",
        "Can you write a toast for my sister? She loves sailing. Make it funny.",
    ]:
        assert decompose(prompt).single, prompt
    mid = decompose("Explain what an API is. Keep it simple. Also, what is REST?")
    assert [p.text for p in mid.parts] == [
        "Explain what an API is. Keep it simple.",
        "Also, what is REST?",
    ]
    end = decompose("What is DNS? What is TLS? Keep it short.")
    assert ([p.text for p in end.parts], end.postscript) == (
        ["What is DNS?", "What is TLS?"],
        "Keep it short.",
    )


def test_a_rhetorical_opener_is_not_a_question() -> None:
    assert decompose("You know how people say cats hate water? Is that true?").single
    assert decompose("¿Sabes cuando el pan se pone duro? ¿Cómo lo evito?").single


def test_reference_words_find_the_answer_they_need_and_only_then() -> None:
    needs = {
        "Which lake is the largest in Italy? Can you swim there?": (0,),
        "Welches Unternehmen ist am größten? Wo ist sein Hauptsitz?": (0,),
        "Quel pays produit le plus de vin ? Quelle est sa capitale ?": (0,),
        "¿Qué empresa vende más coches? ¿Dónde está su sede?": (0,),
        "Qual è il lago più grande? Si può fare il bagno lì?": (0,),
        "Which brand sells the most phones? How much does the cheapest model cost?": (0,),
        "Is there a fee for a passport? Are there faster options?": (),
        "Kahve mi çay mı daha sağlıklı? Günde kaç litre su içmeliyim?": (),
        "¿Cuáles son los ríos de España? ¿Cuáles son los lagos de Francia?": (),
        "What is the capital of Peru? What is the best way to get to Cusco?": (),
    }
    for prompt, want in needs.items():
        assert decompose(prompt).parts[1].depends_on == want, prompt


@pytest.mark.parametrize(
    ("prompt", "confidences"),
    [
        ("What is DNS, and why does it matter?", [1.0]),
        ("1. What is DNS?\n2. Explain TLS.", [0.95, 0.85]),
        ("What is DNS? Explain TLS.", [0.9, 0.6]),
        ("First, write f. Then test it.", [0.75, 0.75]),
        ("what is dns\nhow does tls work", [0.7, 0.7]),
        ("Also what is DNS. What is TLS?", [0.65, 0.9]),
    ],
)
def test_confidence_orders_how_many_signs_agree(prompt: str, confidences: list[float]) -> None:
    """Part.confidence (issue 16): marker + "?" > "?" > marker > step > weak cut > question
    word alone > task verb alone; a prompt left whole is 1.0."""
    assert [p.confidence for p in decompose(prompt).parts] == confidences
