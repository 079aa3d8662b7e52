# kvbench plots, chosen by kind:
#   kind='sweep' (default): achieved vs offered block-ops/s per backend
#     gnuplot -e "datafile='kvbench.dat'; outfile='kvbench.svg'; fmt='svg'" bench/plot.gp
#   kind='fleet-index': the index's bytes against its stored (worker, block) pairs
#     and its unique blocks, one point per fleet size (bench/parts/65-fleet.sh)
#     gnuplot -e "kind='fleet-index'; datafile='fleet-index.dat'; outfile='fleet-index.svg'" bench/plot.gp
#   kind='fleet-query': a query's latency against its scored workers and its matched
#     blocks, one line per fleet size (kvbench --query-cost data, 65-fleet.sh)
#     gnuplot -e "kind='fleet-query'; resdir='bench/results'; fleets='256 1024 4096 16384'; outfile='fleet-query.svg'" bench/plot.gp
if (!exists("kind")) kind = 'sweep'
if (!exists("datafile")) datafile = 'bench/results/kvbench.dat'
if (!exists("outfile")) outfile = 'bench/results/kvbench.svg'
if (!exists("fmt")) fmt = 'svg'
if (!exists("subtitle")) subtitle = ''
if (!exists("resdir")) resdir = 'bench/results'
if (!exists("fleets")) fleets = '256 1024 4096 16384'
if (fmt eq 'png') {
    set terminal pngcairo size 1100,750 font ',10'
} else {
    set terminal svg size 1100,750 dynamic font 'sans,11'
}
set output outfile
colors = "#1f77b4 #d62728 #2ca02c #9467bd #ff7f0e #8c564b #e377c2 #17becf"

if (kind eq 'fleet-index') {
    # Blocks of datafile, one per backend: "title", then
    # workers pairs unique_blocks index_bytes backend_bytes
    stats datafile using 1 nooutput
    nb = STATS_blocks
    set multiplot layout 1,3 title "kvix index size at 256 to 16384 workers (Mooncake streams, kvix\\_index\\_stats)".(subtitle eq '' ? '' : "\n".subtitle)
    set logscale xy
    set format x '%.0s%c'
    set format y '%g'
    set grid lw 0.5 lc rgb '#dddddd'
    set key left top box opaque font ',9'
    set xlabel 'stored (worker, block) pairs'
    set ylabel 'index MiB'
    plot for [i=0:nb-1] datafile index i using 2:($4/1048576) title columnheader(1) \
        smooth unique with linespoints lw 1.8 pt 7 ps 0.8 lc rgb word(colors, i + 1), \
        for [i=0:nb-1] datafile index i using 2:($4/1048576):(sprintf('%d', $1)) notitle \
        with labels offset 0,0.8 font ',8' tc rgb word(colors, i + 1)
    set xlabel 'unique blocks'
    plot for [i=0:nb-1] datafile index i using 3:($4/1048576) title columnheader(1) \
        smooth unique with linespoints lw 1.8 pt 7 ps 0.8 lc rgb word(colors, i + 1)
    set xlabel 'workers'
    set ylabel 'bytes per stored (worker, block)'
    set logscale x 2
    unset logscale y
    set format x '%g'
    set yrange [0:*]
    plot for [i=0:nb-1] datafile index i using 1:($4/$2) title columnheader(1) \
        with linespoints lw 1.8 pt 7 ps 0.8 lc rgb word(colors, i + 1)
    unset multiplot
    exit
}

if (kind eq 'fleet-query') {
    # resdir/fleet-qcost-wN.dat for N in fleets (kvbench --query-cost): block 0
    # groups the first backend's queries by scored workers, block 1 by matched
    # blocks; columns: queries mean_scored mean_blocks p50_us p90_us p99_us.
    # Groups of fewer than 5 queries are left out (one preempted query is
    # their whole figure on a shared machine).
    qf(n) = sprintf('%s/fleet-qcost-w%s.dat', resdir, n)
    set multiplot layout 1,2 title "kvix positional: a query's median latency (kvbench --query-cost, one thread)".(subtitle eq '' ? '' : "\n".subtitle)
    set logscale xy
    set format xy '%g'
    set grid lw 0.5 lc rgb '#dddddd'
    set key left top box opaque font ',9'
    set ylabel 'median latency (us)'
    set xlabel 'scored workers in the answer'
    plot for [k=1:words(fleets)] qf(word(fleets, k)) index 0 using 2:($1 >= 5 ? $4 : NaN) \
        title word(fleets, k).' workers' with linespoints lw 1.8 pt 7 ps 0.7 \
        lc rgb word(colors, k)
    set xlabel 'matched blocks (the longest match)'
    plot for [k=1:words(fleets)] qf(word(fleets, k)) index 1 using 3:($1 >= 5 ? $4 : NaN) \
        title word(fleets, k).' workers' with linespoints lw 1.8 pt 7 ps 0.7 \
        lc rgb word(colors, k)
    unset multiplot
    exit
}

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
plot for [i=0:nblocks-1] datafile index i using 1:2 title columnheader(1) with linespoints \
        lw 1.8 lc rgb word(colors, (i % nbackends) + 1) pt 4 + (i / nbackends) % 7 ps 0.8 \
        dt 1 + (i / nbackends) % 5, \
     x title 'achieved = offered' lw 1 dt 2 lc rgb '#888888', \
     0.95*x title '95% of offered' lw 1 dt 3 lc rgb '#bbbbbb'
