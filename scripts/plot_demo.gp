# NMSE after trimming vs trim fraction, per encoding (data from trim-demo).
set terminal pngcairo size 1100,480 font ",10"
set output outfile
set multiplot layout 1,2 title "nccl-trim codec: error after packet trimming"
set logscale y
set yrange [1e-7:20]
set xlabel "fraction of packets trimmed"
set key bottom right
set format y "10^{%L}"
set grid
set title "one worker's gradient"
set ylabel "NMSE"
plot datafile using 1:2 with linespoints title "sign", \
     "" using 1:4 with linespoints title "sq", \
     "" using 1:6 with linespoints title "sd", \
     "" using 1:8 with linespoints lw 2 title "rht (1-bit heads)", \
     "" using 1:10 with linespoints title "rht (2-bit heads)", \
     "" using 1:12 with linespoints title "rht (16-bit heads)", \
     "" using 1:14 with lines dt 2 lc rgb "gray" title "drop (no trim, before resend)"
set title "average of 8 workers (allreduce)"
plot datafile using 1:3 with linespoints title "sign", \
     "" using 1:5 with linespoints title "sq", \
     "" using 1:7 with linespoints title "sd", \
     "" using 1:9 with linespoints lw 2 title "rht (1-bit heads)", \
     "" using 1:11 with linespoints title "rht (2-bit heads)", \
     "" using 1:13 with linespoints title "rht (16-bit heads)", \
     "" using 1:15 with lines dt 2 lc rgb "gray" title "drop (no trim, before resend)"
unset multiplot
