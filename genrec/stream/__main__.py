from genrec.stream.cli import main

main()
