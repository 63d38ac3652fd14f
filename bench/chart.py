"""The level ladder as an SVG bar chart: one bar per variant, tlc's levels first."""


def svg_chart(path, title, rows, caption="forward time, lower is better (median; blue: tlc levels, grey: PyTorch)"):
    """rows: dicts with "name" and "ms"; bars scaled to the slowest; `caption` under them."""
    bar, gap, top = 26, 8, 50
    left = 20 + 7 * max(len(r["name"]) for r in rows)  # room for the longest label
    width = left + 520
    height = top + len(rows) * (bar + gap) + 40
    longest = max(r["ms"] for r in rows)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="13">', '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="10" y="24" font-size="16" font-weight="bold">{title}</text>']
    for i, r in enumerate(rows):
        y = top + i * (bar + gap)
        length = (width - left - 90) * r["ms"] / longest
        color = "#2b6cb0" if r["name"].startswith("tlc") else "#a0aec0"
        parts.append(f'<text x="{left - 8}" y="{y + bar * 0.7}" text-anchor="end">{r["name"]}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" fill="{color}"/>')
        parts.append(f'<text x="{left + length + 6:.1f}" y="{y + bar * 0.7}">{r["ms"]:.3f} ms</text>')
    parts.append(f'<text x="{left}" y="{height - 12}" fill="#555">{caption}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")
