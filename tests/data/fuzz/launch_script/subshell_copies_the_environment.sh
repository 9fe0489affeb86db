w="x x x x x x x x x x x x x x x x"
A[65535]=1
for a in $w; do for b in $w; do for c in $w; do for d in $w; do x=$(:); done; done; done; done
