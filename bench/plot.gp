# kvbench sweep plot: achieved vs offered block-ops/s per backend.
# gnuplot -e "datafile='kvbench.dat'; outfile='kvbench.svg'; fmt='svg'" bench/plot.gp
if (!exists("datafile")) datafile = 'bench/results/kvbench.dat'
if (!exists("outfile")) outfile = 'bench/results/kvbench.svg'
if (!exists("fmt")) fmt = 'svg'
if (!exists("subtitle")) subtitle = ''
if (fmt eq 'png') {
    set terminal pngcairo size 1100,750 font ',10'
} else {
    set terminal svg size 1100,750 dynamic font 'sans,11'
}
set output outfile
stats datafile using 1 nooutput
nblocks = STATS_blocks
lo = STATS_min
hi = STATS_max
stats datafile using 2 nooutput
lo = STATS_min < lo ? STATS_min : lo
hi = STATS_max > hi ? STATS_max : hi
set xrange [lo / 1.25 : hi * 1.25]
set yrange [lo / 1.25 : hi * 1.25]
set title "kvbench: Mooncake conversation trace replayed at rising speed".(subtitle eq '' ? '' : "\n".subtitle)
set xlabel 'offered load (M block-ops/s)'
set ylabel 'achieved (M block-ops/s)'
set logscale xy
set format xy '%g'
set xtics 2
set ytics 2
set grid xtics ytics mxtics mytics lw 0.5 lc rgb '#dddddd'
set key left top box opaque font ',9'
set style data linespoints
# Blocks come in groups of backends (kvbench's order): colour by backend,
# dash and point type by group (rule x threads).
if (!exists("nbackends")) nbackends = 3
colors = "#1f77b4 #d62728 #2ca02c #9467bd #ff7f0e #8c564b #e377c2 #17becf"
plot for [i=0:nblocks-1] datafile index i using 1:2 title columnheader(1) with linespoints \
        lw 1.8 lc rgb word(colors, (i % nbackends) + 1) pt 4 + (i / nbackends) % 7 ps 0.8 \
        dt 1 + (i / nbackends) % 5, \
     x title 'achieved = offered' lw 1 dt 2 lc rgb '#888888', \
     0.95*x title '95% of offered' lw 1 dt 3 lc rgb '#bbbbbb'
