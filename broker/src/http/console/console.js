// The queen console's one script: a confirmation before a form marked data-confirm is
// sent (the pages work without it).
document.addEventListener("submit", (e) => {
  const q = e.target.getAttribute("data-confirm");
  if (q && !window.confirm(q)) e.preventDefault();
});
