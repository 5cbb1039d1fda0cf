"""README and docs/ say what the notebooks say: the same lessons, times, and one course address."""

import re

from utils import notebooks as gen

DOCS = [gen.ROOT / "README.md", *sorted((gen.ROOT / "docs").glob("*.md"))]


def test_every_colab_link_opens_an_existing_notebook_of_this_release():
    url, tag = gen.course_address()
    repo = url.removeprefix("https://github.com/")
    links = [(d.name, m) for d in DOCS for m in re.findall(r"https://colab\.research\.google\.com/github/[^\s)]+",
                                                            d.read_text())]  # fmt: skip
    assert links, "README and docs/ link no lesson on Colab"
    for doc, link in links:
        m = re.fullmatch(rf"https://colab\.research\.google\.com/github/{re.escape(repo)}/blob/{re.escape(tag)}/"
                         r"(notebooks|solutions)/(\d\d_\w+)\.ipynb", link)  # fmt: skip
        assert m, f"{doc}: {link} is not a notebook of {repo} at {tag} (pyproject.toml's address and version)"
        assert (gen.ROOT / m.group(1) / f"{m.group(2)}.ipynb").exists(), f"{doc}: {link} names no notebook"


def test_the_generated_lesson_tables_list_every_lesson_with_its_time():
    lessons = gen.lesson_index()
    readme = (gen.ROOT / "README.md").read_text()
    for lesson in lessons:
        assert f"| {lesson.number} | [{lesson.title}](solutions/{lesson.stem}.ipynb) | {lesson.minutes} min |" in readme
    block = readme.split(gen.TABLE_BEGIN, 1)[1].split(gen.TABLE_END, 1)[0]
    assert len(re.findall(r"^\| \d\d \|", block, re.M)) == len(lessons), "the table lists a lesson that is gone"


def test_the_instructor_guide_times_every_lesson_as_the_lesson_does():
    text = (gen.ROOT / "docs" / "instructor.md").read_text()
    rows = dict(re.findall(r"^\| (\d\d) [^|]+\| ≈(\d+) min \|", text, re.M))
    stated = {lesson.number: str(lesson.minutes) for lesson in gen.lesson_index()}
    assert rows == stated, "docs/instructor.md's lesson table must list every lesson with the time it states"


def test_the_setup_cell_shown_in_the_docs_is_the_one_the_lessons_have():
    cell = gen.setup_cell_source()
    shown = [(d.name, b) for d in DOCS for b in re.findall(r"```python\n(.*?)\n```", d.read_text(), re.S)
             if "google.colab" in b]  # fmt: skip
    assert shown, "docs/ show no setup cell"
    for doc, block in shown:
        assert block == cell, f"{doc}: its setup cell is not the one `make notebooks` writes (utils.notebooks)"


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return 60 * int(hours) + int(minutes)


def test_the_instructor_guide_plans_give_each_lesson_its_time():
    """The timing plans give a lesson taught whole the time the lesson states, and the short plan fills 90 minutes."""
    text = (gen.ROOT / "docs" / "instructor.md").read_text()
    stated = {lesson.number: lesson.minutes for lesson in gen.lesson_index()}
    wrong = [f"'{n} whole ({m})', the lesson says {stated[n]}" for n, m in re.findall(r"\b(\d\d) whole \((\d+)\)", text)
             if int(m) != stated[n]]  # fmt: skip
    short = re.search(r"^For a room new to GPUs.*?\n\n", text, re.M | re.S)
    assert short, "docs/instructor.md: the 90-minute plan for a room new to GPUs is gone"
    parts = [int(m) for m in re.findall(r"\((\d+)(?: minutes)?\)", short.group(0))]
    if sum(parts) != 90:
        wrong.append(f"the plan for a room new to GPUs takes {' + '.join(map(str, parts))} minutes, not 90")
    days = text.split("### Two days", 1)[1].split("\n## ", 1)[0]
    slots = 0
    for row in re.findall(r"^\| (\d\d:\d\d)–(\d\d:\d\d) \|(.*)\|$", days, re.M):
        for cell in row[2].split("|"):
            m = re.match(r"\s*(?:(\d\d:\d\d)–(\d\d:\d\d) )?(\d\d) .*?(?:\(to (\d\d:\d\d)\))?\s*$|", cell)
            if not m.group(3):
                continue
            start, end = m.group(1) or row[0], m.group(4) or m.group(2) or row[1]
            for number in [m.group(3), *re.findall(r"— or (\d\d) ", cell)]:
                slots += 1
                if _minutes(end) - _minutes(start) != stated[number]:
                    wrong.append(f"two days: lesson {number} has {start}–{end}, the lesson says {stated[number]}")
    assert slots >= 9, "docs/instructor.md's two-day plan no longer reads as '| HH:MM–HH:MM | NN lesson | … |' rows"
    assert not wrong, "docs/instructor.md: " + "; ".join(wrong)
