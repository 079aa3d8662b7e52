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
set title "kvbench: Mooncake conversation trace replayed at rising speed".(subtitle eq '' ? '' : "\n".subtitle)
set xlabel 'offered load (M block-ops/s)'
set ylabel 'achieved (M block-ops/s)'
set logscale xy
set grid xtics ytics mxtics mytics lw 0.5 lc rgb '#dddddd'
set key left top box opaque font ',9'
set style data linespoints
plot for [i=0:nblocks-1] datafile index i using 1:2 title columnheader(1) lw 1.5 pt (i%13)+1 ps 0.7, \
     x title 'achieved = offered' lw 1 dt 2 lc rgb '#888888', \
     0.95*x title '95% of offered' lw 1 dt 3 lc rgb '#bbbbbb'
