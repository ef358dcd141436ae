#!/usr/bin/env bash
# Draws the PNG plots of one `rest bench` output directory from its TSV tables (gnuplot, from Debian):
#   speedup.png  median speedup over plain by method, with the per-prompt 25-75% range
#   accept.png   distribution of accepted draft lengths per step, by method
#   cost.png     the cost model's measured t(N)/t(1) for a forward pass of N rows
# Usage: bench/plot.sh DIR [TITLE]
set -euo pipefail
dir=${1:?usage: bench/plot.sh DIR [TITLE]}
title=${2:-$(basename "$dir")}

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot.sh: installing gnuplot-nox" >&2
    if [ "$(id -u)" = 0 ]; then apt-get install -y -q gnuplot-nox >&2; else sudo apt-get install -y -q gnuplot-nox >&2; fi
fi
for f in speedup.tsv accept.tsv cost.tsv; do
    [ -s "$dir/$f" ] || { echo "plot.sh: missing $dir/$f (run rest bench --out $dir first)" >&2; exit 1; }
done

term='set terminal pngcairo size 1000,560 enhanced font "DejaVu Sans,11"'
if ! gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1; then term='set terminal png size 1000,560'; fi

gnuplot <<EOF
$term
set output "$dir/speedup.png"
set title "Speedup over plain decoding (median, bars: per-prompt 25-75%) -- $title" noenhanced
set ylabel "speedup (plain ms/token / method ms/token)"
set style data histogram
set style fill solid 0.6 border -1
set boxwidth 0.6
set grid ytics
set yrange [0:*]
set xtics rotate by -30 noenhanced
set key off
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "gray30"
plot "$dir/speedup.tsv" using 0:2:xtic(1) with boxes lc rgb "#4477aa", \
     "" using 0:2:3:4 with yerrorbars lc rgb "black" pt -1, \
     "" using 0:(\$4 > \$2 ? \$4 : \$2):(sprintf("%.2fx\nM=%.2f", \$2, \$7)) with labels offset 0,1.4 font ",9"
EOF

ncol=$(head -1 "$dir/accept.tsv" | awk -F'\t' '{print NF}')
if [ "$ncol" -gt 1 ]; then
gnuplot <<EOF
$term
set output "$dir/accept.png"
set title "Accepted draft tokens per step -- $title" noenhanced
set xlabel "draft tokens accepted in one step (the step emits one more)"
set ylabel "fraction of steps"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set yrange [0:*]
set key top right noenhanced
plot for [i=2:$ncol] "$dir/accept.tsv" using i:xtic(1) title columnheader(i)
EOF
fi

gnuplot <<EOF
$term
set output "$dir/cost.png"
set title "Cost model: forward-pass time for N rows, relative to one row -- $title" noenhanced
set xlabel "rows in the forward pass (root + draft nodes)"
set ylabel "t(N) / t(1)"
set logscale xy 2
set grid
set key top left
plot "$dir/cost.tsv" using 1:3 with linespoints lw 2 pt 7 title "measured t(N)/t(1)", \
     "" using 1:(\$1) with lines dt 2 lc rgb "gray40" title "N (fully compute-bound)", \
     1 with lines dt 3 lc rgb "gray60" title "flat (free verification)"
EOF
echo "plot.sh: wrote $dir/speedup.png $( [ "$ncol" -gt 1 ] && echo "$dir/accept.png" ) $dir/cost.png" >&2
