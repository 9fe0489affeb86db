a=x
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19; do a="$a $a"; done
w="x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x"
for i in $w; do arr+=($a); done
