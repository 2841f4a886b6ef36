# The batch-size plot of docs/benchmarks.md ("Side by side"): rows/s and p99
# per step of every system on the v41 in-RAM table, one connection, against
# the rows a step asks for. Input: the tab-separated file that
# `engram-bench --plot-data FILE` writes (ids, step, then rows/s and p99 ms
# per system). scripts/bench.sh runs it:
#
#   gnuplot -e "data='build/engram-bench/bench_batch.tsv'; out='docs/bench_batch.png'" \
#           bench/engram_bench/plot_bench.gnuplot
if (!exists("data")) data = 'bench_batch.tsv'
if (!exists("out")) out = 'bench_batch.png'

set datafile separator "\t"
set datafile missing "?"
stats data using 1 nooutput
n = (STATS_columns - 2) / 2   # systems

set terminal png size 1000,420 font ",9"
set output out
set multiplot layout 1,2 title "engram-bench: decode steps B=1/64/256 and a 2,048-token prefill chunk (v41, in RAM, 1 connection)"
set logscale xy
set grid
set xrange [25:250000]
set xlabel "rows per step"
set xtics rotate by -30 font ",8"

set ylabel "rows/s"
set format y "%.0s%c"
set key bottom right font ",8"
plot for [i=1:n] data using 1:(column(1 + 2*i)):xtic(2) with linespoints lw 2 title columnhead(1 + 2*i)

set ylabel "p99 per step (ms)"
set format y "%g"
set key bottom right font ",8"
plot for [i=1:n] data using 1:(column(2 + 2*i)):xtic(2) with linespoints lw 2 title columnhead(1 + 2*i)
unset multiplot
