// expected-error@+1:8 {{cannot find imported file 'no_such_file.mm'}}
import "no_such_file.mm"
