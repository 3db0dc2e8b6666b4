"""A small DOM for asserting on rendered pages without a browser (the standard library's parser)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr",
        "circle", "line", "rect", "path"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.text_parts) + "".join(c.text for c in self.children)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and (cls is None or cls in child.classes()) and \
                    all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                found.append(child)
            found += child.find_all(tag, cls, **attrs)
        return found

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}>"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(Node("#text", {}, text_parts=[data]))


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    return builder.root


def unpacked(page: str) -> dict[str, str]:
    """A problem page's details, {anchor: html}, unpacked as its script does in the browser (every
    block of them)."""
    import base64
    import gzip
    import json
    import re

    blocks = re.findall(r'<script type="application/octet-stream" class="details-data" data-anchors="([^"]*)">([^<]*)'
                        r'</script>', page)
    assert blocks, "no details in the page"
    found = {}
    for anchors, data in blocks:
        fragments = json.loads(gzip.decompress(base64.b64decode(data)))
        assert set(anchors.split()) == set(fragments) - {""}, "a block names other anchors than it holds"
        found |= fragments
    return found
