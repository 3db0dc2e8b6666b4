// Click a header to sort its table (numbers by value, text in natural order: 2_ before 12_).
const natural = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});
document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], column = th.cellIndex;
  const ascending = th.getAttribute("aria-sort") !== "ascending";
  th.closest("tr").querySelectorAll("th").forEach(h => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const key = row => { const cell = row.cells[column], text = cell.textContent.trim();
                       const v = cell.dataset.sort ?? (text === "–" ? "-1" : text);  // "–": none, below every number
                       const n = Number(v); return v !== "" && !isNaN(n) ? n : v; };
  [...body.rows].sort((a, b) => { const x = key(a), y = key(b);
      const order = typeof x === typeof y ? (typeof x === "number" ? x - y : natural.compare(x, y)) : (typeof x === "number" ? -1 : 1);
      return ascending ? order : -order; }).forEach(row => body.appendChild(row));
}));
// A clamped reason opens on click (its tooltip says so; set here, not in each of 5,000 rows).
document.querySelectorAll("div.reason.clamp").forEach(cell => {
  cell.title = "click to show all";
  cell.addEventListener("click", () => cell.classList.toggle("open"));
});
// Type to filter rows, or pick a verdict; sections left empty are hidden and the count says how many are shown.
const search = document.getElementById("filter"), statusPick = document.getElementById("status-filter");
const counter = document.getElementById("filter-count");
function applyFilter() {
  const text = search ? search.value.toLowerCase() : "", wanted = statusPick ? statusPick.value : "";
  let shown = 0, total = 0;
  document.querySelectorAll("table.sortable:not(.overview):not(.generators) tbody tr").forEach(row => {
    const verdict = wanted === "near_miss" ? row.hasAttribute("data-near-miss") : (!wanted || row.dataset.status === wanted);
    const show = verdict && row.textContent.toLowerCase().includes(text);
    row.classList.toggle("hidden", !show); total += 1; shown += show; });
  document.querySelectorAll("section.problem").forEach(section =>
    section.classList.toggle("hidden", !section.querySelector("tbody tr:not(.hidden)")));
  if (counter) counter.textContent = `${shown} of ${total} candidates`;
}
if (search) search.addEventListener("input", applyFilter);
if (statusPick) statusPick.addEventListener("change", applyFilter);
// A problem's page holds its candidates' details as blocks of base64 of gzipped JSON {anchor: html}
// (the site stays small; fetch() of a local file is refused, so they are in the page): the block
// holding the anchor the URL names is unpacked (once) and that candidate shown; with none named,
// the list of them, in the first block.
const blocks = [...document.querySelectorAll("script.details-data")], details = document.getElementById("details");
const unpacked = new Map();
async function unpack(base64) {
  const bytes = Uint8Array.from(atob(base64.trim()), c => c.charCodeAt(0));
  return JSON.parse(await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text());
}
function fragmentsOf(block) {
  if (!unpacked.has(block)) unpacked.set(block, unpack(block.textContent));
  return unpacked.get(block);
}
async function showDetails() {
  const wanted = decodeURIComponent(location.hash.slice(1));
  const block = blocks.find(b => b.dataset.anchors.split(" ").includes(wanted)) ?? blocks[0];
  const fragments = await fragmentsOf(block);
  if (decodeURIComponent(location.hash.slice(1)) !== wanted) return;  // another was asked for meanwhile
  const anchor = wanted in fragments ? wanted : "";
  details.innerHTML = fragments[anchor];
  details.dataset.shown = anchor;  // what tests (and scripts) wait for
  const heading = details.querySelector("h1"), verdict = details.querySelector("#verdict");
  document.title = heading ? heading.textContent + (verdict ? " · " + verdict.textContent : "") : document.title;
  window.scrollTo(0, 0);
}
function showOrSay() {
  showDetails().catch(error => { details.textContent = `The details could not be unpacked: ${error}`; });
}
if (blocks.length && details && "DecompressionStream" in window) {
  showOrSay();
  window.addEventListener("hashchange", showOrSay);
}
